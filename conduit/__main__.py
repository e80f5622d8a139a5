from conduit.ops.cli import app

app()
