"""The Textual app: `KvtuiApp` (main.py) composed of its roles: loading a trace file (loading.py), replay
controls (playback.py), live mode (live.py), tab and request selection (selection.py); its tabs, one table
(tabs.py). Its style: app.tcss."""

from kvtui.app.live import FEED_BATCH
from kvtui.app.main import KvtuiApp
from kvtui.app.playback import SPEEDS
from kvtui.app.tabs import TABS

__all__ = ["FEED_BATCH", "SPEEDS", "TABS", "KvtuiApp"]
