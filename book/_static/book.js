/* The book's page scripts: legible wide figures, the book's own search ranking, the drill.
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

  // The search page ranks with the book's own index (_static/book-search.js, written by
  // scripts/build_site.py, which ranks the same way in Python for its tests): a word in a
  // question's heading counts most, then its short answer, then its prose, then its code;
  // every word must occur, a word of 3+ letters also matches the start of a longer one, and
  // two neighbouring words score again as a phrase (the second also as a prefix); each term's
  // scores already carry its rarity across pages.
  function stem(t) { return t.length > 3 && /s$/.test(t) && !/ss$/.test(t) ? t.slice(0, -1) : t; }
  function tokens(text) {
    return (text.toLowerCase().match(/[a-z0-9_]+/g) || []).filter(function (t) { return t.length > 1; }).map(stem);
  }
  function rank(index, query) {
    var words = tokens(query), scores = null;
    words.forEach(function (w) {
      var got = {};
      Object.keys(index.terms).forEach(function (term) {
        var f = term === w ? 1 : (w.length >= 3 && term.indexOf(w) === 0 && term.indexOf(" ") < 0 ? 0.5 : 0);
        if (!f) return;
        index.terms[term].forEach(function (p) { got[p[0]] = Math.max(got[p[0]] || 0, f * p[1]); });
      });
      if (scores === null) { scores = got; return; }
      var both = {};
      Object.keys(scores).forEach(function (p) { if (p in got) both[p] = scores[p] + got[p]; });
      scores = both;
    });
    if (!scores) return [];
    for (var k = 0; k + 1 < words.length; k++) {  // a phrase bonus: the pair's own score where it occurs
      var pair = words[k] + " " + words[k + 1], second = words[k + 1], bonus = {};
      Object.keys(index.terms).forEach(function (term) {  // the second word also as a prefix, at half
        var f = term === pair ? 1 : (second.length >= 3 && term.indexOf(pair) === 0 &&
                                     term.split(" ").length === 2 ? 0.5 : 0);
        if (!f) return;
        index.terms[term].forEach(function (p) { bonus[p[0]] = Math.max(bonus[p[0]] || 0, f * p[1]); });
      });
      Object.keys(bonus).forEach(function (p) { if (p in scores) scores[p] += bonus[p]; });
    }
    var round = function (x) { return Math.round(x * 1e6) / 1e6; };
    return Object.keys(scores).map(Number).sort(function (a, b) {
      return round(scores[b]) - round(scores[a]) || a - b;
    });
  }
  function bookSearch() {
    var results = document.getElementById("search-results");
    if (!results || !window.BOOK_SEARCH) return;
    var index = window.BOOK_SEARCH;
    var query = new URLSearchParams(window.location.search).get("q") || "";
    document.querySelectorAll(".bd-search-container input[name=q]").forEach(function (input) { input.value = query; });
    results.innerHTML = "";
    if (!tokens(query).length) return;
    var found = rank(index, query);
    var summary = document.createElement("p");
    summary.className = "search-summary";
    summary.textContent = found.length
      ? found.length + " page" + (found.length > 1 ? "s" : "") + " match \u201c" + query + "\u201d, the question that explains it first."
      : "No page matches \u201c" + query + "\u201d. Check the spelling, or try fewer words.";
    var list = document.createElement("ul");
    list.className = "search";
    var root = (document.documentElement.dataset.content_root || "");
    found.forEach(function (i) {
      var page = index.pages[i], li = document.createElement("li"), a = document.createElement("a");
      a.href = root + page[0];
      a.textContent = page[1];
      li.appendChild(a);
      if (page[2]) {
        var p = document.createElement("p");
        p.className = "context";
        p.textContent = page[2];
        li.appendChild(p);
      }
      list.appendChild(li);
    });
    var title = document.createElement("h2");
    title.textContent = "Search results";
    results.appendChild(title);
    results.appendChild(summary);
    results.appendChild(list);
  }

  // Drill (book/drill.md): the page holds a card per question, built from the revision sheet's
  // parts; this shows one at a time, reveals the short answer and then the follow-ups one by
  // one, and keeps the reader's marks in local storage.
  var MARKS_KEY = "autogradviz-drill-marks";
  function loadMarks() {
    try { return JSON.parse(window.localStorage.getItem(MARKS_KEY) || "{}") || {}; } catch (e) { return {}; }
  }
  function saveMarks(marks) {
    try { window.localStorage.setItem(MARKS_KEY, JSON.stringify(marks)); } catch (e) { /* private mode */ }
  }
  function drill() {
    var app = document.getElementById("drill-app");
    if (!app) return;
    var cards = [].slice.call(document.querySelectorAll("div.drill-card"));
    if (!cards.length) return;
    var number = function (card) { return Number(/drill-q(\d+)/.exec(card.className)[1]); };
    var marks = loadMarks(), order = [], pos = 0, shown = 0;
    var LABEL = { knew: "knew it", shaky: "shaky", missed: "missed" };
    var RANK = { missed: 0, shaky: 1, undefined: 2, knew: 3 };
    app.innerHTML =
      '<div class="drill-controls">' +
      '<label>Order <select id="drill-order">' +
      '<option value="chapter">chapter order</option><option value="random">random</option>' +
      '<option value="weak">shaky/missed first</option></select></label> ' +
      '<button type="button" id="drill-start" class="btn btn-sm btn-outline-primary">New round</button>' +
      '<span id="drill-progress" class="drill-progress"></span></div>' +
      '<div class="drill-actions">' +
      '<button type="button" id="drill-reveal" class="btn btn-primary">Reveal the short answer</button> ' +
      '<button type="button" id="drill-followup" class="btn btn-outline-primary">Next follow-up</button></div>' +
      '<div class="drill-marks" id="drill-marks">' +
      '<button type="button" class="btn btn-success" data-mark="knew">Knew it</button> ' +
      '<button type="button" class="btn btn-warning" data-mark="shaky">Shaky</button> ' +
      '<button type="button" class="btn btn-danger" data-mark="missed">Missed</button></div>' +
      '<p class="drill-tally" id="drill-tally"></p>';
    var $ = function (id) { return document.getElementById(id); };
    function tally() {
      var n = { knew: 0, shaky: 0, missed: 0 };
      Object.keys(marks).forEach(function (q) { if (marks[q] in n) n[marks[q]]++; });
      $("drill-tally").textContent = "Marked so far: " + n.knew + " knew it, " + n.shaky + " shaky, " +
        n.missed + " missed, " + (cards.length - n.knew - n.shaky - n.missed) + " not yet.";
    }
    function show() {
      cards.forEach(function (c) { c.classList.remove("drill-current"); });
      var card = order[pos];
      card.classList.add("drill-current");
      card.querySelectorAll(".drill-answer, .drill-followup").forEach(function (e) { e.classList.remove("drill-shown"); });
      shown = 0;
      var mark = marks[number(card)];
      $("drill-progress").textContent = "Question " + (pos + 1) + " of " + order.length +
        (mark ? " \u00b7 last time: " + LABEL[mark] : "");
      $("drill-reveal").disabled = false;
      $("drill-followup").disabled = true;
      $("drill-marks").querySelectorAll("button").forEach(function (b) { b.classList.toggle("drill-chosen", b.dataset.mark === mark); });
    }
    function start() {
      var how = $("drill-order").value;
      order = cards.slice();
      if (how === "random" || how === "weak") {
        for (var i = order.length - 1; i > 0; i--) {
          var j = Math.floor(Math.random() * (i + 1)), t = order[i];
          order[i] = order[j];
          order[j] = t;
        }
      }
      if (how === "weak") {
        order.sort(function (a, b) { return RANK[marks[number(a)]] - RANK[marks[number(b)]]; });
      }
      pos = 0;
      show();
    }
    $("drill-reveal").addEventListener("click", function () {
      var card = order[pos];
      card.querySelector(".drill-answer").classList.add("drill-shown");
      $("drill-reveal").disabled = true;
      $("drill-followup").disabled = !card.querySelector(".drill-followup");
      if (window.MathJax && MathJax.typesetPromise) MathJax.typesetPromise([card]).catch(function () {});
    });
    $("drill-followup").addEventListener("click", function () {
      var items = order[pos].querySelectorAll(".drill-followup");
      if (shown < items.length) items[shown++].classList.add("drill-shown");
      $("drill-followup").disabled = shown >= items.length;
    });
    $("drill-marks").querySelectorAll("button").forEach(function (b) {
      b.addEventListener("click", function () {
        marks[number(order[pos])] = b.dataset.mark;
        saveMarks(marks);
        tally();
        if (pos + 1 < order.length) { pos++; show(); } else { $("drill-progress").textContent = "Round done: start a new one."; }
      });
    });
    $("drill-start").addEventListener("click", start);
    $("drill-order").addEventListener("change", start);
    document.body.classList.add("drill-ready");
    tally();
    start();
  }

  // The question index's short addresses ("questions.html#q13", from before each question had
  // its own page) go on to the question's page.
  function questionAddress() {
    var m = /^#q(\d+)$/.exec(window.location.hash);
    if (!m || !/\/questions\.html$/.test(window.location.pathname)) return;
    var item = document.getElementById("q" + m[1]), link = item && item.querySelector("a[href]");
    if (link) window.location.replace(link.href);
  }

  // On the search page a new search needs no reload: reloading would parse the whole index
  // (megabytes) again for every query. The address still carries ?q= for back and bookmarks.
  function searchInPlace() {
    if (!document.getElementById("search-results") || !window.BOOK_SEARCH) return;
    document.querySelectorAll("form").forEach(function (form) {
      var input = form.querySelector("input[name=q]");
      if (!input) return;
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        var url = new URL(window.location.href);
        url.searchParams.set("q", input.value);
        history.pushState(null, "", url);
        var dialog = form.closest("dialog");
        if (dialog && dialog.open) dialog.close();
        bookSearch();
      });
    });
    window.addEventListener("popstate", bookSearch);
  }

  // Phones wrap long code lines (book.css). A wrapped piece should start under its own
  // line's indentation, not at column 0, or the code's Python indentation is lost: each line
  // of a code or output block becomes one span carrying its indentation (--indent), which
  // book.css turns into a hanging indent on narrow screens. The text, newlines included, is
  // unchanged, so selecting or copying a block gives the same characters.
  function wrap(text, wrappers) {
    var node = document.createTextNode(text);
    for (var i = wrappers.length - 1; i >= 0; i--) {
      var outer = wrappers[i].cloneNode(false);
      outer.appendChild(node);
      node = outer;
    }
    return node;
  }
  function hangingIndents() {
    document.querySelectorAll("article div.highlight pre, article div.cell_output pre").forEach(function (pre) {
      if (pre.querySelector("span.line")) return;
      var lines = [[]], texts = [""];
      (function walk(node, wrappers) {
        Array.prototype.slice.call(node.childNodes).forEach(function (child) {
          if (child.nodeType === 1) { walk(child, wrappers.concat([child])); return; }
          if (child.nodeType !== 3) return;
          child.data.split("\n").forEach(function (part, i) {
            if (i > 0) { lines[lines.length - 1].push(document.createTextNode("\n")); lines.push([]); texts.push(""); }
            if (part) { lines[lines.length - 1].push(wrap(part, wrappers)); texts[texts.length - 1] += part; }
          });
        });
      })(pre, []);
      if (!lines[lines.length - 1].length) { lines.pop(); texts.pop(); }
      pre.textContent = "";
      lines.forEach(function (nodes, k) {
        var line = document.createElement("span");
        line.className = "line";
        line.style.setProperty("--indent", String(/^ */.exec(texts[k])[0].length));
        nodes.forEach(function (n) { line.appendChild(n); });
        pre.appendChild(line);
      });
    });
  }

  window.addEventListener("hashchange", questionAddress);
  document.addEventListener("DOMContentLoaded", function () {
    questionAddress(); figures(); hangingIndents(); bookSearch(); searchInPlace(); drill();
  });
})();
