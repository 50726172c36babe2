SELECT v FROM locksmith_data WHERE k = ?
