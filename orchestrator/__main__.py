from orchestrator.cli.app import main

main()
