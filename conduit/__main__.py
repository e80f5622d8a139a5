from conduit.cli import app

app()
