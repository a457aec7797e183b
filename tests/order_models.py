"""Nested pydantic models that tool signatures take, for the schema and argument-coercion tests."""

from pydantic import BaseModel


class LineItem(BaseModel):
    """One line of an order: a stock-keeping unit and how many of it."""

    sku: str
    qty: int = 1


class Order(BaseModel):
    """A customer's order of several line items."""

    customer: str
    items: list[LineItem]
