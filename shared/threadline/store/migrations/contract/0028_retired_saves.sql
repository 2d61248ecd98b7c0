-- depends: 0027_one_save
-- Contract (docs/decisions.md, 113; applied by `threadline migrate --contract` only, once no
-- process of the release before 0027 runs): the four save functions that 0027's
-- threadline_save_step replaced, which that release's workers called — 0011's
-- threadline_save_step (its first signature), 0013's threadline_save_step_continue, 0017's
-- threadline_save_step_claim and 0026's threadline_save_step_announce. A database created after
-- those migrations dropped their text never had them, and one where an earlier 0027 dropped
-- them has none left: each drop is IF EXISTS.
DROP FUNCTION IF EXISTS threadline_save_step(text, bigint, integer, integer, double precision, jsonb, text[], jsonb,
                                             bigint, jsonb, text, text, jsonb, bytea);
DROP FUNCTION IF EXISTS threadline_save_step_continue(text, bigint, integer, integer, double precision, jsonb, text[],
                                                      jsonb, bigint, text, text, jsonb, bytea, text, bigint);
DROP FUNCTION IF EXISTS threadline_save_step_claim(text, bigint, integer, integer, double precision, jsonb, text[],
                                                   jsonb, bigint, text, text, jsonb, bytea, text, bigint);
DROP FUNCTION IF EXISTS threadline_save_step_announce(text, bigint, integer, integer, double precision, jsonb, text[],
                                                      jsonb, bigint, text, text, jsonb, bytea, text, bigint, text,
                                                      jsonb, bytea[], integer, bigint[]);
