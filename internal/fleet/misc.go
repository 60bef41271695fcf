package fleet

import "strconv"

func fieldIndex(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

func itoa(n int) string { return strconv.Itoa(n) }

func ptr[T any](v T) *T { return &v }
