SET client_connection_check_interval = '1s'
