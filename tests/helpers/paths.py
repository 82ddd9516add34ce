"""Where the repository's files are, for the tests that read them (configs/, docs/, examples/, the
package): found from this file, so a test reads them from whichever folder of tests/ it is in."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root folder (the one holding synattn/, tests/, docs/, configs/)."""
