-- The reader needs REPLICATION SLAVE, REPLICATION CLIENT and SELECT; the demo also creates tables.
GRANT ALL PRIVILEGES ON *.* TO 'rowbus'@'%';
