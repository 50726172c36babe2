SELECT IF(EXISTS(SELECT 1 FROM locksmith_wakes WHERE owner = ?), 0, SLEEP(?)) AS slept /* locksmith wait */
