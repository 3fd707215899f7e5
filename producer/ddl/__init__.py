"""The reader's MySQL DDL interpreter: a table definition carried through CREATE and ALTER.

Only the reader's schema tracker (`rowbus.producer.tracker`) and its start-up reading of the
source's tables (`rowbus.producer.server`) use it; which table a statement touches is the
protocol's (`rowbus.protocol.ddl`), since every consumer needs that too.

- `apply`: CREATE TABLE / ALTER TABLE on a `TableDef`;
- `columns`: one column definition (type, charset, default, generated, keys);
- `types`: MySQL type words to the protocol's column types;
- `defaults`: DEFAULT clauses as the server stores them;
- `words`: the token cursor these modules read statements with.
"""
