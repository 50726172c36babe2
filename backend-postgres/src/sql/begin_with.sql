BEGIN; {settings}
