package cli

func init() { scriptCommands["journal-merge"] = runAs(JournalMerge) }
