"""Syntax-tree helpers for the structural rules (vectorize, warp_reduce, warp_per_row, smem_tiling, ...).

Why a module of its own: the structural rules recognize *shapes* of code — "the global thread index",
"a guard on it", "a loop over a row", "a read indexed exactly by the loop variable" — on tree-sitter's
tree of the current candidate, and rebuild a kernel from pieces of the original text with some
sub-expressions substituted. Doing that with one set of helpers keeps the recognizers strict in the same
way: names are compared as identifiers (never as substrings), parentheses are looked through, and text
is re-emitted from the tree so comments and formatting inside kept expressions survive.

Everything here is a pure function of (node, bytes); nothing assumes the reference kernels' names.

The helpers live in one module per job, re-exported here so every rule keeps importing from
``._structural``: ``syntax`` (statements, names, subscripts, re-emitted text), ``loops`` (declarations,
``for`` headers, bounds), ``mapping`` (thread-index shapes: global index, grid stride, 2-D, elementwise) and
``launch`` (instantiated types, launch fitting at the spec's sizes, bounds in spec terms).
"""

from __future__ import annotations

from ....cuda.tree import unparen as unparen  # re-exported: the rules import it from here
from ....cuda.tree import written_names as written_names  # likewise
from .launch import dims_values as dims_values
from .launch import envs as envs
from .launch import extent_expr as extent_expr
from .launch import extents_2d as extents_2d
from .launch import fresh_body as fresh_body
from .launch import in_kernel_terms as in_kernel_terms
from .launch import is_1d as is_1d
from .launch import is_2d_launch as is_2d_launch
from .launch import launch_ok as launch_ok
from .launch import resolved_type as resolved_type
from .launch import scalar_value_expr as scalar_value_expr
from .launch import with_body as with_body
from .loops import Bound as Bound
from .loops import Decl as Decl
from .loops import ForParts as ForParts
from .loops import bound_text as bound_text
from .loops import failing_bound as failing_bound
from .loops import for_parts as for_parts
from .loops import single_decl as single_decl
from .loops import sole_assignment as sole_assignment
from .loops import upper_bound as upper_bound
from .mapping import _FLAT_2D as _FLAT_2D
from .mapping import Elementwise as Elementwise
from .mapping import Grid2D as Grid2D
from .mapping import _index_decl_1d as _index_decl_1d
from .mapping import _is_block_dim as _is_block_dim
from .mapping import _monomials as _monomials
from .mapping import _split as _split
from .mapping import elementwise_1d as elementwise_1d
from .mapping import flat_index_2d as flat_index_2d
from .mapping import global_index as global_index
from .mapping import grid_2d as grid_2d
from .mapping import is_grid_stride as is_grid_stride
from .syntax import _BREAKABLE as _BREAKABLE
from .syntax import _COLLECTIVE_PREFIXES as _COLLECTIVE_PREFIXES
from .syntax import MINMAX_FUNCS as MINMAX_FUNCS
from .syntax import SHUFFLE_TYPES as SHUFFLE_TYPES
from .syntax import VECTOR_TYPES as VECTOR_TYPES
from .syntax import all_names as all_names
from .syntax import binary_parts as binary_parts
from .syntax import call_names as call_names
from .syntax import condition_of as condition_of
from .syntax import declarator_name as declarator_name
from .syntax import declared_names as declared_names
from .syntax import flush as flush
from .syntax import has_collective as has_collective
from .syntax import has_jump as has_jump
from .syntax import identifiers as identifiers
from .syntax import indent as indent
from .syntax import is_builtin as is_builtin
from .syntax import is_collective as is_collective
from .syntax import is_ident as is_ident
from .syntax import is_return_only as is_return_only
from .syntax import is_syncthreads as is_syncthreads
from .syntax import is_zero_literal as is_zero_literal
from .syntax import line_indent_of as line_indent_of
from .syntax import render as render
from .syntax import shared_arrays as shared_arrays
from .syntax import statements as statements
from .syntax import subscript_parts as subscript_parts
