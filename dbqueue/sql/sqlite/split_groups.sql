-- The statements of a split queue with consumer groups that differ from split.sql's (see
-- postgresql/split_groups.sql). SQLite has one writer at a time: the removals of split.sql,
-- whose second statement deletes the data rows no other group holds ({data_unheld}), need no
-- lock, and serve the groups as they are.

-- split_push --
-- The data row, then a meta row in every group's table ({fan_out}: one insert per group, of
-- the id the first statement returned as :ids).
INSERT INTO {data} ({insert_columns})
VALUES ({payload_params}:now)
RETURNING id;
{fan_out};

-- split_push_many --
-- No array parameters: the core runs this block once per row inside one transaction.
INSERT INTO {data} ({insert_columns})
VALUES ({payload_params}:now)
RETURNING id;
{fan_out};
