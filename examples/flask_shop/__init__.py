"""A Flask application on Flask-SQLAlchemy that pushes dbqueue messages from its views."""
