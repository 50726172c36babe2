SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST WHERE ID IN ({ids}) AND INFO LIKE '%locksmith wait%'
