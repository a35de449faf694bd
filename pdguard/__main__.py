from .runtime import run

run()
