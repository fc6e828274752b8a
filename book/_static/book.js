/* The book's page scripts: legible wide figures, and search hits that land on their question.
   No network: everything here works on the pages and files of the site itself. */
(function () {
  "use strict";

  // Never show a figure at less than 60% of its natural width on a wide screen: past that,
  // the labels are too small to read. Its output box scrolls instead (book.css). On a phone
  // the reader zooms, so the figure still fits the screen there.
  var MIN_SCALE = 0.6, WIDE_SCREEN_PX = 992;
  function keepLegible(img) {
    if (window.innerWidth < WIDE_SCREEN_PX || !img.naturalWidth) return;
    img.style.minWidth = Math.round(MIN_SCALE * img.naturalWidth) + "px";
  }
  function figures() {
    document.querySelectorAll("article div.cell_output img").forEach(function (img) {
      if (img.complete) keepLegible(img);
      else img.addEventListener("load", function () { keepLegible(img); });
    });
  }

  // Sphinx's search links a hit in a page's body text to the top of the page. On a chapter,
  // find the first question section ("Q<n>. ..." heading) whose text holds a searched word and
  // point the hit at that question's "#q<n>" anchor (or the section's own id).
  var pages = {};
  function fetchPage(url) {
    if (!pages[url]) {
      pages[url] = fetch(url).then(function (r) { return r.text(); }).then(function (html) {
        return new DOMParser().parseFromString(html, "text/html");
      });
    }
    return pages[url];
  }
  function questionFor(doc, words) {
    var sections = doc.querySelectorAll("article section");
    for (var i = 0; i < sections.length; i++) {
      var h = sections[i].querySelector(":scope > h1, :scope > h2");
      var m = h && /^\s*Q(\d+)\./.exec(h.textContent);
      if (!m) continue;
      var text = sections[i].textContent.toLowerCase();
      if (words.some(function (w) { return text.indexOf(w) >= 0; })) {
        var anchor = sections[i].querySelector("#q" + m[1]);
        return anchor ? anchor.id : sections[i].id;
      }
    }
    return null;
  }
  function retarget(link, words) {
    var url = new URL(link.href);
    if (url.hash || !/\.html$/.test(url.pathname)) return;
    link.dataset.bookRetarget = "pending";
    fetchPage(url.origin + url.pathname).then(function (doc) {
      var id = questionFor(doc, words);
      if (id) link.href = url.origin + url.pathname + url.search + "#" + id;
      link.dataset.bookRetarget = id ? "done" : "none";
    }).catch(function () { link.dataset.bookRetarget = "none"; });
  }
  function searchHits() {
    var results = document.getElementById("search-results");
    if (!results) return;
    var query = new URLSearchParams(window.location.search).get("q") || "";
    var words = query.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 1; });
    if (!words.length) return;
    var scan = function () {
      results.querySelectorAll("ul.search li > a:not([data-book-retarget])").forEach(function (a) {
        retarget(a, words);
      });
    };
    new MutationObserver(scan).observe(results, { childList: true, subtree: true });
    scan();
  }

  document.addEventListener("DOMContentLoaded", function () { figures(); searchHits(); });
})();
