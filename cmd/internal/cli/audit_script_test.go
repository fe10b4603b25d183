package cli

func init() { scriptCommands["audit"] = runAs(Audit) }
