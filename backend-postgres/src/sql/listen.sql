LISTEN "{channel}"
