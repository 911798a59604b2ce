"""``JobError``, in a module of its own: the language server catches it on every command, and importing it must
not import the job machinery (search, GPU, LLM policy), which the server loads only when a job starts."""

from __future__ import annotations


class JobError(Exception):
    """A job that cannot start, or a request about one that cannot be honoured; the message is for the user."""
