"""`python -m synedre.cli`, as the tests and the fleet's children run it."""
from synedre.cli import main

main()
