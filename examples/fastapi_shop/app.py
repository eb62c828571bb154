"""The shop's HTTP API: place an order (and push its confirmation in the same transaction),
push price ticks, read the queues' stats.

Run it with ``uvicorn examples.fastapi_shop.app:app``; ``POST /orders`` runs on a sync
``Session`` (FastAPI runs it in its thread pool), ``POST /async/orders`` and ``POST /prices``
on an ``AsyncSession``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from dbqueue import InvalidPayload, QueueFull
from examples.fastapi_shop import db
from examples.fastapi_shop.models import Order, OrderConfirmation, PriceTick


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    # Pooled asyncio connections belong to this event loop: close them before it ends.
    await db.database.async_engine.dispose()


app = FastAPI(title="dbqueue example shop", lifespan=lifespan)


def get_session() -> Iterator[Session]:
    """One transaction per request: committed when the endpoint returns, rolled back when it
    raises (the exception reaches this ``with`` first, then the exception handlers)."""
    with db.SessionLocal.begin() as session:
        yield session


async def get_async_session() -> AsyncIterator[AsyncSession]:
    """:func:`get_session` on an AsyncSession."""
    async with db.AsyncSessionLocal.begin() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
AsyncSessionDep = Annotated[AsyncSession, Depends(get_async_session)]


class OrderIn(BaseModel):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    total: Decimal = Field(gt=0, max_digits=10, decimal_places=2)


class OrderOut(BaseModel):
    order: int
    message: int


class TickIn(BaseModel):
    symbol: str = Field(min_length=1, max_length=12)
    price: Decimal = Field(gt=0, max_digits=12, decimal_places=4)


@app.post("/orders", status_code=201)
def place_order(data: OrderIn, session: SessionDep) -> OrderOut:
    """Create the order and push its confirmation in ONE transaction: both or neither."""
    order = Order(email=data.email, total=data.total)
    session.add(order)
    session.flush()  # INSERT now, for order.id
    message = OrderConfirmation.queue.push(session, order_id=order.id, email=order.email)
    return OrderOut(order=order.id, message=message)


@app.post("/async/orders", status_code=201)
async def place_order_async(data: OrderIn, session: AsyncSessionDep) -> OrderOut:
    """:func:`place_order` on an AsyncSession."""
    order = Order(email=data.email, total=data.total)
    session.add(order)
    await session.flush()
    message = await OrderConfirmation.queue.apush(session, order_id=order.id, email=order.email)
    return OrderOut(order=order.id, message=message)


@app.post("/prices", status_code=201)
async def push_prices(ticks: list[TickIn], session: AsyncSessionDep) -> dict[str, list[int]]:
    """Push a batch of ticks into the ring, one statement; their numbers in input order."""
    now = dt.datetime.now(dt.UTC)
    rows = [{"symbol": t.symbol, "price": t.price, "quoted_at": now} for t in ticks]
    return {"ticks": await PriceTick.queue.apush_many(session, rows)}


@app.get("/queues")
def queue_stats(session: SessionDep) -> dict[str, dict[str, Any]]:
    """Each queue's ``stats()``: counts per state, ``oldest_ready_age`` in seconds (or null)."""
    return {
        model.__tablename__: {
            key: value.total_seconds() if isinstance(value, dt.timedelta) else value
            for key, value in model.queue.stats(session).items()
        }
        for model in (OrderConfirmation, PriceTick)
    }


@app.exception_handler(InvalidPayload)
async def invalid_payload(request: Request, exc: InvalidPayload) -> JSONResponse:
    """A payload the queue refused (an e-mail longer than its column, say). The transaction
    was rolled back already, the order with it."""
    return JSONResponse({"detail": str(exc)}, status_code=422)


@app.exception_handler(QueueFull)
async def queue_full(request: Request, exc: QueueFull) -> JSONResponse:
    """The ring stayed full for ``push_timeout``: no worker is keeping up. Nothing was kept."""
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "5"})
