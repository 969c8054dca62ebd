from rag_cli.cli import main

main()
