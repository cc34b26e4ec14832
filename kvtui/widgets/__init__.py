"""Line-API views of a CacheState: never one widget per block or per token."""
