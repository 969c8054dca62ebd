from rag_cli.cli.root import main

main()
