"""The type variables PyFlink's modules define (``T``, ``K``, ``V``, ``W``, ``W2``, ``IN``, ``IN1``,
``IN2``, ``OUT``, ``KEY``): not in their ``__all__``, but programs import them to annotate their
functions (``from pyflink.datastream.functions import KEY, IN, OUT``), so ``streamjob.runtime`` has
them too. ``tools/pyflink_signatures.py`` lists PyFlink's (``typevars`` in pyflink_signatures.json)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
W = TypeVar("W")
W2 = TypeVar("W2")
IN = TypeVar("IN")
IN1 = TypeVar("IN1")
IN2 = TypeVar("IN2")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")

NAMES = ("T", "K", "V", "W", "W2", "IN", "IN1", "IN2", "OUT", "KEY")
