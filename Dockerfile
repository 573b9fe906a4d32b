FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY src ./src
COPY prompts ./prompts
COPY migrations ./migrations
RUN pip install . && python -m coach download-files

RUN useradd --create-home coach
USER coach
EXPOSE 8081
ENTRYPOINT ["python", "-m", "coach"]
CMD ["start"]
