from rota.cli.main import app

app()
