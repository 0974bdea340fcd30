package store

// finiteNumeric is the SQL of column col as numeric, NULL where it is not
// finite (NaN or ±Infinity, which a float8 column can hold): aggregated
// as numeric, avg() and sum() cannot overflow (avg over float8 rows of
// 1e308 does, and failed a whole suite's series with "value out of range";
// issue 29), and the average of finite values cast back to float8 is
// finite.
func finiteNumeric(col string) string {
	return "(CASE WHEN abs((" + col + ")::float8) < 'Infinity'::float8 THEN (" + col + ")::numeric END)"
}
