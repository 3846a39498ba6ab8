DROP TABLE compactions;
