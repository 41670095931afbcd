"""Operations surface: metrics, health, the ops HTTP server."""
