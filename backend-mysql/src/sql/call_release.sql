CALL locksmith_release_v3(?, ?, ?)
