CALL locksmith_release_v4(?, ?, ?)
