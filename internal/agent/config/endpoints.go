package config

// ParseEndpoints checks a comma-separated list of server URLs as
// CAPSTAN_ENDPOINT is checked: http:// or https:// each, with a host.
func ParseEndpoints(raw string) ([]string, error) { return parseEndpoints(raw) }
