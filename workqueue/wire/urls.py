"""URLconf of the wire API; include it at the root so /v1/environments/... resolves."""

urlpatterns: list = []
