package cli

func init() { scriptCommands["plan"] = runAs(Plan) }
