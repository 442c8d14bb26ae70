"""Pages of rows: offset pages for job listings, keyset pages for a job's growing histories."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "RowPage", "check_limit", "keyset_page", "offset_page"]

DEFAULT_PAGE_SIZE = 50
#: A page larger than this is refused: a job has at most a few hundred attempts, and one
#: attempt's verdict can carry a long log.
MAX_PAGE_SIZE = 500

T = TypeVar("T")


@dataclass(frozen=True)
class RowPage(Generic[T]):
    """One page of rows.

    ``next_cursor`` is what to pass back (an offset for offset pages, the last key seen for keyset
    pages) to get the following page; ``None`` on the last page. ``total`` is counted for offset
    pages only (keyset histories grow while being read).
    """

    items: Sequence[T]
    next_cursor: int | None
    total: int | None = None


def check_limit(limit: int) -> int:
    """The limit itself, or ValueError when it is outside ``1..MAX_PAGE_SIZE``."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
    return limit


def offset_page(session: Session, stmt: Select[Any], *, limit: int, offset: int) -> RowPage[Any]:
    """Run an ordered ``select(Model)`` as one offset page, with the total count."""
    check_limit(limit)
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    total = session.scalar(select(func.count()).select_from(stmt.order_by(None).subquery())) or 0
    items = list(session.scalars(stmt.limit(limit).offset(offset)))
    next_offset = offset + len(items)
    return RowPage(items=items, next_cursor=next_offset if next_offset < total else None, total=total)


def keyset_page(items: Sequence[T], *, limit: int, key: Callable[[T], int]) -> RowPage[T]:
    """Cut rows fetched with ``LIMIT limit + 1`` into a page; the extra row says another follows."""
    if len(items) > limit:
        kept = list(items[:limit])
        return RowPage(items=kept, next_cursor=key(kept[-1]))
    return RowPage(items=list(items), next_cursor=None)

