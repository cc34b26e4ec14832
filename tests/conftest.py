import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # tiny_models and other test helpers
