NOTIFY "{channel}"
