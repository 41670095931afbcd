"""SPL (the SLS Processing Language) on PullLogs: the subset `loghubd serve` implements.

Pure: no I/O, no clock. `compile(text)` parses a statement (tokenizer + recursive descent
into a small AST), type-checks it and turns it into a `Program`: a function over one flattened
log (`{"__time__": "...", "__topic__": "...", "level": "ERROR", ...}`, every value a string)
that returns the transformed log, or None when a `where` dropped it. Compiled programs are
cached (bounded LRU), so a consumer sending the same statement with every pull pays for the
parse once.

The grammar, the functions and the semantics are documented in README.md ("SPL on pull").
In short::

    statement   := '*' ( '|' instruction )*
    instruction := 'where' expr
                 | 'extend' field '=' expr ( ',' field '=' expr )*
                 | 'project' [ '-wildcard' ] item ( ',' item )*   (item := field | field '=' field)
                 | 'project-away' [ '-wildcard' ] field ( ',' field )*
                 | 'project-rename' field '=' field ( ',' field '=' field )*
    expr        := or;  or := and ('or' and)*;  and := not ('and' not)*;  not := 'not' not | pred
    pred        := concat [ cmp concat | 'is' ['not'] 'null' | ['not'] 'like' concat
                           | ['not'] 'in' '(' expr (',' expr)* ')'
                           | ['not'] 'between' concat 'and' concat ]
    concat      := sum ('||' sum)*;  sum := term (('+'|'-') term)*
    term        := unary (('*'|'/'|'%') unary)*
    unary       := ('-'|'+') unary | primary
    primary     := 'string' | number | 'true' | 'false' | 'null' | field | '(' expr ')'
                 | ('cast'|'try_cast') '(' expr 'as' type ')' | function '(' [expr (',' expr)*] ')'

Errors in the statement raise `SplError(position, reason)` (position = 0-based character
offset). Errors while evaluating one log (a failed `cast`, a non-numeric string compared with
a number, a division by zero) raise `SplEvalError` from `Program.run`; the caller drops that
log and counts it as failed. `Program.__call__` never raises: a failed log is None.

The modules, in the order a statement goes through them: `lexer` (tokens), `parser` (syntax
tree of `ast` nodes, refusals with positions), `check` (static types and refusals),
`evaluate` (expressions to callables, over `values`, `patterns` and the `functions` table),
`program` (instructions to stages, `Program`, the cached `compile`). This module is the
public face: import from `loghubd.server.spl`, not from the modules.
"""

from loghubd.server.spl.check import MAX_TREE_DEPTH
from loghubd.server.spl.errors import SplError, SplEvalError
from loghubd.server.spl.functions import FUNCTIONS, MAX_TEXT
from loghubd.server.spl.lexer import Token, tokenize
from loghubd.server.spl.parser import INSTRUCTIONS, MAX_DEPTH, MAX_STATEMENT_CHARS, parse
from loghubd.server.spl.patterns import like
from loghubd.server.spl.program import CACHE_SIZE, Program, Stage, compile
from loghubd.server.spl.values import CAST_TYPES, TIME_FIELDS, Record, Value, to_text

# The names the function and type tables had when this package was one module (tests use them).
_FUNCTIONS = FUNCTIONS
_CAST_TYPES = CAST_TYPES

__all__ = [
    "CACHE_SIZE",
    "CAST_TYPES",
    "FUNCTIONS",
    "INSTRUCTIONS",
    "MAX_DEPTH",
    "MAX_STATEMENT_CHARS",
    "MAX_TEXT",
    "MAX_TREE_DEPTH",
    "TIME_FIELDS",
    "Program",
    "Record",
    "SplError",
    "SplEvalError",
    "Stage",
    "Token",
    "Value",
    "compile",
    "like",
    "parse",
    "to_text",
    "tokenize",
]
