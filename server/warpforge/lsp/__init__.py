"""The language server (pygls 2.x): a thin translation between LSP and the pipeline's own types.

Features live in their own modules (diagnostics, code lens, code actions, jobs); each registers its
handlers on the server, and an exception inside one is logged and answered as an error without taking
the server down.
"""
