"""FastAPI: a request handler writes an order and enqueues its confirmation in ONE transaction.

The order row and the job that confirms it commit together or not at all: a crash before the
commit leaves neither, a rollback (a failed insert, an exception in the handler) leaves
neither, and the worker sees the job the moment the order commits (SPEC §8,
docs/transactions.md). Run it against a PostgreSQL database::

    pip install 'jobledger[sqlalchemy]' fastapi uvicorn
    export SHOP_DATABASE=postgresql://localhost/shop
    uvicorn examples.fastapi_orders:api             # the web app
    python -m examples.fastapi_orders               # a worker, in another terminal

    curl -X POST localhost:8000/orders -H 'content-type: application/json' \\
         -d '{"email": "ada@example.com", "total_cents": 4200}'
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

import jobledger

DATABASE = os.environ.get("SHOP_DATABASE", "postgresql://postgres@127.0.0.1:5432/shop")

# One database for both: the store (schema "jobledger") and the shop's own tables.
jobs = jobledger.App(DATABASE, name="shop", authorize=jobledger.allow_all)
engine = create_async_engine(DATABASE.replace("postgresql://", "postgresql+psycopg://", 1))
Session = async_sessionmaker(engine, expire_on_commit=False)


@jobs.handler("send_confirmation")
def send_confirmation(ctx: jobledger.JobContext) -> dict[str, Any]:
    order = ctx.payload
    print(f"confirming order {order['orderId']} to {order['email']}")  # your mailer here
    return {"sent": order["email"]}


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, "
                "email text NOT NULL, total_cents integer NOT NULL CHECK (total_cents > 0))"
            )
        )
    await asyncio.to_thread(jobs.ensure_job, "confirm-order", "send_confirmation")
    yield
    await engine.dispose()
    jobs.close()


api = FastAPI(lifespan=lifespan)


class OrderIn(BaseModel):
    email: str
    total_cents: int


@api.post("/orders", status_code=201)
async def create_order(order: OrderIn) -> dict[str, Any]:
    async with Session() as session, session.begin():  # commits on leaving, rolls back on error
        inserted = await session.execute(
            text("INSERT INTO orders (email, total_cents) VALUES (:email, :total) RETURNING id"),
            {"email": order.email, "total": order.total_cents},
        )
        order_id = inserted.scalar_one()
        occurrence = await jobs.enqueue_async(
            "confirm-order",
            payload={"orderId": order_id, "email": order.email},
            key=f"order-{order_id}",  # one confirmation per order, however often this runs
            conn=session,  # the same transaction as the INSERT above
        )
        if order.email.endswith("@invalid"):
            # Any error from here on rolls back the order AND its confirmation job.
            raise HTTPException(status_code=422, detail="undeliverable address")
    return {"orderId": order_id, "occurrenceId": occurrence.id}


if __name__ == "__main__":
    jobs.ensure_job("confirm-order", "send_confirmation")
    jobs.run_worker(concurrency=4)
