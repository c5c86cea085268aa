"""Pure decisions shared by the controllers: plain data in, values or patch operations out, no I/O."""
