"""Autograd graphs and module calls: what `trace`, `live`, `backward_order` and
`trace_modules` record, and how render.py, strips.py and module_view.py draw it."""
