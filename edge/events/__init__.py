"""From tracked boxes to stored and delivered events: event bookkeeping, SQLite store, outbox, MQTT, webhooks.

May import edge.stream's result types and what lies below it; the stream never imports the event layer.
"""
