SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'super_read_only')
