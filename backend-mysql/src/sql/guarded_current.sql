SELECT v FROM locksmith_data WHERE k = ? FOR UPDATE
