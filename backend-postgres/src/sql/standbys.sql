SELECT current_setting('synchronous_standby_names')
