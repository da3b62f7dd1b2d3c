-- Retention: catalog look-ups shared by registration and by every batch.
-- Policies store names, resolved again at every use: a dropped or retyped
-- column is an error, never a wrong DELETE.

-- _retention_column: a column's base type (a cast to a domain would run its
-- owner's CHECK), qualified, and its category; NULL: no such column.
CREATE OR REPLACE FUNCTION _retention_column(p_table regclass, p_column text, OUT type_sql text, OUT base_type regtype,
    OUT category "char")
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_typ oid;
BEGIN
    SELECT a.atttypid INTO v_typ
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = p_table AND a.attname = p_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF v_typ IS NULL THEN RETURN; END IF;
    WHILE (SELECT t.typtype FROM pg_catalog.pg_type t WHERE t.oid = v_typ) = 'd' LOOP
        SELECT t.typbasetype INTO v_typ FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
    END LOOP;
    SELECT format('%I.%I', n.nspname, t.typname) INTO type_sql
      FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
     WHERE t.oid = v_typ;
    base_type := v_typ::regtype;
    SELECT t.typcategory INTO category FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
END
$$;

-- _retention_table resolves a policy's table by its stored names.
CREATE OR REPLACE FUNCTION _retention_table(p_schema text, p_table text)
RETURNS regclass
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
BEGIN
    SELECT c.oid INTO v_rel
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = p_schema AND c.relname = p_table AND c.relkind IN ('r', 'p');
    IF v_rel IS NULL THEN
        RAISE EXCEPTION 'retention: table %.% no longer exists', quote_ident(p_schema), quote_ident(p_table)
            USING ERRCODE = 'undefined_table';
    END IF;
    RETURN v_rel;
END
$$;

-- _retention_index names a btree index that can drive the keyset walk: every
-- key column before the time column is one the policy pins (status, filter).
CREATE OR REPLACE FUNCTION _retention_index(p_table regclass, p_time_column text, p_status_column text,
    p_filter_column text)
RETURNS regclass
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT i.indexrelid::regclass
      FROM pg_catalog.pg_index i
      JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
      JOIN pg_catalog.pg_am am ON am.oid = ic.relam AND am.amname = 'btree'
      CROSS JOIN LATERAL (
          SELECT array_agg(a.attname ORDER BY k.ord) AS cols
            FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
            LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
           WHERE k.ord <= i.indnkeyatts) kc
     WHERE i.indrelid = p_table AND i.indisvalid AND i.indpred IS NULL
       AND p_time_column = ANY (kc.cols)
       AND (SELECT bool_and(coalesce(c = p_status_column, false) OR coalesce(c = p_filter_column, false))
              FROM unnest(kc.cols[1:array_position(kc.cols, p_time_column::name) - 1]) c) IS NOT FALSE
     ORDER BY array_position(kc.cols, p_time_column::name), i.indexrelid
     LIMIT 1
$$;
