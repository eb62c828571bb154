"""An example shop on FastAPI and SQLAlchemy: orders pushed with their confirmation e-mail in
one transaction, price ticks on a ring queue, and handlers run by ``dbqueue worker``."""
