from judge.cli import run

run()
