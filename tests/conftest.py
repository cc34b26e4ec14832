import sys
from pathlib import Path

TESTS = Path(__file__).parent
# tiny_models, synthetic and other test helpers
sys.path.insert(0, str(TESTS))
# the repository root first: otherwise `import kvtui` under a bare `pytest` finds the folder tests/kvtui (a
# namespace package) before the editable install's real one
sys.path.insert(0, str(TESTS.parent))
