# The HTTP API (contextstore serve) with the PostgreSQL driver; see docker-compose.yml.
FROM python:3.12-slim
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY contextstore ./contextstore
COPY migrations ./migrations
RUN pip install --no-cache-dir '.[serve,postgres]'
# Runs as root so it can read the key file mounted from the host, which 'contextstore keys'
# creates readable by its owner only.
WORKDIR /srv
EXPOSE 8080
# SIGTERM lets requests in flight finish, then the server exits 0.
STOPSIGNAL SIGTERM
CMD ["contextstore", "serve", "--host", "0.0.0.0", "--port", "8080", "--workers", "2"]
