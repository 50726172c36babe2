UNLISTEN "{channel}"
