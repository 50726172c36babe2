CALL locksmith_release_v2(?, ?, ?)
