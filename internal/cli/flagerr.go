package cli

// FlagErrorAsTyped is asTyped for the other commands of the binary
// (server, dev, etcd), which parse their flags with the flag package too.
func FlagErrorAsTyped(err error, args []string) error { return asTyped(err, args) }
