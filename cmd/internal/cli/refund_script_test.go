package cli

func init() { scriptCommands["refund"] = runAs(Refund) }
